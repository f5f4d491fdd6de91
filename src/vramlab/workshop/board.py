"""The progress board as a JupyterHub service at ``/services/progress`` (admins only).

Started by the hub (``vramlab.workshop.room.configure`` registers it) as::

    python -m vramlab.workshop.board --port 10101 --dir <room>/progress

A tornado app built like JupyterHub's ``whoami-oauth`` example: ``HubOAuthenticated`` handlers plus
``HubOAuthCallbackHandler`` at ``<prefix>/oauth_callback`` (jupyterhub/services/auth.py). Access:
the service's default ``hub_scopes`` is ``access:services!service=progress``, which only the admin
role has (jupyterhub/roles.py); the handler also refuses a user whose model says ``admin: false``.
The page re-renders the board from the JSON lines on every request and refreshes itself every 30 s.
"""

from __future__ import annotations

import argparse
import os
from datetime import datetime, timezone
from urllib.parse import urlparse

REFRESH_S = 30


def make_app(directory: str, prefix: str | None = None, stuck_min: float = 10.0):
    """The tornado Application serving the board under ``prefix`` (``JUPYTERHUB_SERVICE_PREFIX``)."""
    from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
    from jupyterhub.utils import url_path_join
    from tornado.web import Application, HTTPError, RequestHandler, authenticated

    from vramlab import progress

    class BoardHandler(HubOAuthenticated, RequestHandler):
        @authenticated
        def get(self) -> None:
            user = self.get_current_user()
            if user.get("kind", "user") == "user" and user.get("admin") is False:
                raise HTTPError(403, "the progress board is for the instructor (admin) only")
            board = progress.read_board(directory)
            if self.get_argument("format", "") == "text":
                self.set_header("Content-Type", "text/plain; charset=utf-8")
                self.write(progress.render_text(board, stuck_min=stuck_min))
                return
            self.write(progress.board_html(board, now=datetime.now(timezone.utc), stuck_min=stuck_min,
                                           refresh_s=REFRESH_S))

    prefix = prefix or os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/progress/")
    return Application([
        (prefix, BoardHandler),
        (url_path_join(prefix, "oauth_callback"), HubOAuthCallbackHandler),
        (prefix.rstrip("/"), BoardHandler),
    ], cookie_secret=os.urandom(32))


def main(argv: list[str] | None = None) -> None:
    from tornado.ioloop import IOLoop

    parser = argparse.ArgumentParser(prog="python -m vramlab.workshop.board", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="the learners' VRAMLAB_PROGRESS_DIR")
    parser.add_argument("--port", type=int, default=None, help="default: the port in JUPYTERHUB_SERVICE_URL")
    parser.add_argument("--stuck-min", type=float, default=10.0)
    args = parser.parse_args(argv)
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
    app = make_app(args.dir, stuck_min=args.stuck_min)
    app.listen(args.port or url.port or 10101, url.hostname or "127.0.0.1")
    IOLoop.current().start()


if __name__ == "__main__":
    main()
