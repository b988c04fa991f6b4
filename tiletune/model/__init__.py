"""Whole models: import (``source``, ``importer``), the convolutions' layout (``layout``), kernels and
tasks (``tasks``, ``default_schedule``), tuning under one task scheduler (``scheduler``, ``tuner``), building
and exporting (``build``) and the end-to-end benchmark (``bench``). ``tiletune model tasks|tune|build|bench`` drives them."""
