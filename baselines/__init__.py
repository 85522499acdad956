"""baselines (see DESIGN.md)."""
