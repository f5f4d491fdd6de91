"""Lab 07 (bitsandbytes): 8- and 4-bit loads of SmolLM2, the setup doctor, and the setup-log reader.

``quantized`` loads and measures; ``design`` measures one learner-chosen ``BitsAndBytesConfig``; ``threshold`` sweeps LLM.int8()'s outlier threshold on a loaded model;
``doctor`` diagnoses an installation (and breaks one on purpose, in a subprocess); ``logs`` explains a
pasted bitsandbytes log.
"""

from vramlab.bnb import quantized, design, threshold, doctor, logs  # noqa: F401
