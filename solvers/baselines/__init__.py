"""The paper's baselines as registered selectors (rules in docs/baselines.md)."""
