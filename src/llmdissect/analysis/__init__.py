"""Analysis of stored records: comparisons, validation of estimates, findings."""
