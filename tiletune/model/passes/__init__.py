"""Relax rewrites that make an imported model ready for fusion, run in one order by ``pipeline.prepare`` (indices,
split slices, hoisting, dtype, layout), and those ``kernels.tasks.fuse`` runs before legalization (constant layouts,
Winograd, padded widths)."""
