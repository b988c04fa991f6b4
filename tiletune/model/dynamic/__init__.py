"""Models with symbolic dimensions: tasks at several shapes (``shapes``), the rule for shapes not tuned
(``shape_rule``), transfer and shared search across shapes, and construction at first use (``first_use``)."""
