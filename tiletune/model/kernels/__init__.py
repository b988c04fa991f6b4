"""From the prepared module to kernels: fusion and task extraction (``tasks``), the fusion-time rewrites
(``fast_math``, ``producer_fusion``, ``pad_fusion``), and the schedules of kernels that are not tuned
(``default_schedule``, ``gpu_default``, ``library_kernels``)."""
