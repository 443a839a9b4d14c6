"""Micro-benchmarks: operators at a model's shapes, collectives, machine ceilings."""
