"""Tuning a model's tasks under one budget: the task ``scheduler``, the ``tuner`` loop, the confirmation of each task's
best kernel (``confirm``) and the progress display."""
