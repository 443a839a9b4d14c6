"""Workloads: what is measured (training, inference, serving), apart from how it is launched."""
