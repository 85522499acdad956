"""Language-goal block stacking environments (registered under the GameOn/ namespace)."""
