"""Reading run directories back: comparisons, tables and significance tests over many runs."""
