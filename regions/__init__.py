"""Regions and inter-regional balancing."""
