"""Sensitivities, samplers and mechanisms: pure functions of statistics, ε and a sampler."""
