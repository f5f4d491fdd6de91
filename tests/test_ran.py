"""vramlab.ran: one registry of what the learner ran; the lasting kinds survive a restart and reach child processes."""

import json
import os
import subprocess
import sys
import time

from vramlab import ran


def test_in_process_only_when_off(monkeypatch, tmp_path):
    monkeypatch.setenv(ran.RAN_ENV, "off")
    assert ran.records_file() is None
    ran.note("k", (1, 2), lasting=True)
    assert (1, 2) in ran.ran("k")
    ran._forget()
    assert not ran.ran("k")


def test_unset_means_a_named_notebook_kernel_only(monkeypatch, tmp_path):
    monkeypatch.delenv(ran.RAN_ENV, raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert ran.records_file() is None                      # a script or nbclient: the process only
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ana/labs/08_watch_vram.ipynb")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert ran.records_file() == tmp_path / "vramlab" / ran.RAN_FILE_NAME


def test_lasting_records_reach_a_restarted_kernel_and_a_child_process(monkeypatch, tmp_path):
    """Review #8 ran the capstone's dry run in a child process, which the kernel's registry never saw; a restart
    cleared every record. A lasting note is read back by a fresh process, and a child's note by the parent."""
    path = tmp_path / "ran.jsonl"
    monkeypatch.setenv(ran.RAN_ENV, str(path))
    ran._forget()
    ran.note("dry_run shape", (4, 4096, "bfloat16", (7, 5), "eager"), lasting=True)
    ran.note("stored prediction", ("peak", 0, 1.5))                    # an order counted in this kernel: not lasting
    assert json.loads(path.read_text().splitlines()[0])["kind"] == "dry_run shape"
    child = ("from vramlab import ran; print(sorted(ran.ran('dry_run shape')), sorted(ran.ran('stored prediction'))); "
             "ran.note('dry_run shape', (1, 2048, 'bfloat16', (7, 5), 'sdpa'), lasting=True)")
    out = subprocess.run([sys.executable, "-c", child], env={**os.environ, ran.RAN_ENV: str(path)},
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "[(4, 4096, 'bfloat16', (7, 5), 'eager')] []"
    ran._RAN.clear()                                                    # a restarted kernel
    assert ran.ran("dry_run shape") == {(4, 4096, "bfloat16", (7, 5), "eager"), (1, 2048, "bfloat16", (7, 5), "sdpa")}
    ran._forget()
    assert not path.exists() and not ran.ran("dry_run shape")


def test_inside_unrecorded_nothing_is_written_and_odd_keys_stay_in_the_process(monkeypatch, tmp_path):
    path = tmp_path / "ran.jsonl"
    monkeypatch.setenv(ran.RAN_ENV, str(path))
    ran._forget()
    with ran._unrecorded():
        ran.note("burst", (7, ((1, 2),)), lasting=True)
    assert not path.exists() and not ran.ran("burst")

    class Odd:
        pass

    odd = Odd()
    ran.note("odd", odd, lasting=True)                 # no literal repr: kept in the process, not written
    assert odd in ran.ran("odd") and not path.exists()
    path.write_text("not json\n{\"kind\": \"burst\", \"key\": \"__import__('os')\"}\n")   # junk and code: skipped
    assert not ran.ran("burst")
    ran._forget()


def test_many_lines_are_one_write_and_the_file_stays_bounded(monkeypatch, tmp_path):
    path = tmp_path / "ran.jsonl"
    monkeypatch.setenv(ran.RAN_ENV, str(path))
    monkeypatch.setattr(ran, "_MAX_BYTES", 20_000)
    ran._forget()
    ran.note_many("explained log line", [f"{i:016x}" for i in range(2000)], lasting=True)
    assert len(path.read_text().splitlines()) == 2000
    ran.note("explained log", "ffff", lasting=True)                # over the bound: the newer half stays
    lines = path.read_text().splitlines()
    assert len(lines) == 1001 and "ffff" in lines[-1]
    ran._forget()


def test_records_are_kept_per_notebook(monkeypatch, tmp_path):
    """Unseen review #9: one file per learner made an exploratory eager dry run in any lab a reading of lab 08's
    capstone. Each record names its notebook (JPY_SESSION_NAME, inherited by the kernel's child processes), and a
    process reads only its own notebook's; a reset forgets only its own."""
    path = tmp_path / "ran.jsonl"
    monkeypatch.setenv(ran.RAN_ENV, str(path))
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ana/labs/05_mla_latent_cache.ipynb")
    ran._forget()
    ran.note("dry_run shape", (1, 4096, "bfloat16", (8, 0), "eager"), lasting=True)
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ana/labs/08_watch_vram.ipynb")
    ran._RAN.clear()
    assert not ran.ran("dry_run shape")
    ran.note("dry_run shape", (4, 4096, "bfloat16", (7, 5), "sdpa"), lasting=True)
    ran._forget()                                                       # lab 08's reset leaves lab 05's record
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ana/labs/05_mla_latent_cache.ipynb")
    assert ran.ran("dry_run shape") == {(1, 4096, "bfloat16", (8, 0), "eager")}
    ran._forget()
    assert not path.exists()


def test_a_prediction_and_its_measurement_last_across_a_restart(monkeypatch, tmp_path, capsys):
    """Review #15 measured, restarted the kernel, stored another number and passed: check_prediction's records last."""
    from vramlab.checks import check_prediction

    monkeypatch.setenv(ran.RAN_ENV, str(tmp_path / "ran.jsonl"))
    ran._forget()
    assert check_prediction(90_000, what="the cache size")
    assert check_prediction(90_000, 93_184, what="the cache size")
    ran._RAN.clear()                                                    # a restarted kernel
    capsys.readouterr()
    assert not check_prediction(93_184, what="the cache size")         # a changed prediction is a reading
    assert "stored after the measurement ran in this notebook" in capsys.readouterr().out
    assert check_prediction(90_000, what="the cache size")              # Run All with the same number passes
    result = check_prediction(93_184, 93_184, what="the cache size")    # the one stored before is compared
    assert result and "you predicted 90,000" in capsys.readouterr().out
    ran._forget()


def test_stamp_keeps_the_first_time_and_first_before_reads_the_first_key_before_it(monkeypatch, tmp_path):
    monkeypatch.setenv(ran.RAN_ENV, str(tmp_path / "ran.jsonl"))
    ran._forget()
    assert ran.first_time("checked") is None and ran.first_before("stored", "checked") is None
    ran.note("stored", (10, "a"), lasting=True)
    ran.note("stored", (5, "b", 2), lasting=True)
    assert ran.first_before("stored", "checked") == ("b", 2)             # no check yet: the earliest of all
    assert ran.last_before("stored", "checked") == ("a",)                # ... and the latest of all
    ran.stamp("checked")
    first = ran.first_time("checked")
    ran.stamp("checked")
    assert ran.first_time("checked") == first and len(ran.ran("checked")) == 1
    ran.note("stored", (first + 1, "c"), lasting=True)                   # after the check: never the one compared
    ran._RAN.clear()                                                     # a restarted kernel
    assert ran.first_before("stored", "checked") == ("b", 2) and ran.first_time("checked") == first
    assert ran.last_before("stored", "checked") == ("a",)                # "c" came after the check
    assert ran.last_before("stored", "never stamped", "checked") == ("a",)   # the earliest of the marks' stamps
    ran._forget()
    ran.note("stored", (time.time_ns() + 10**12, "late"), lasting=True)
    ran.stamp("checked")
    assert ran.first_before("stored", "checked") is None                 # stored only after the check
    assert ran.last_before("stored", "checked") is None
    ran._forget()
