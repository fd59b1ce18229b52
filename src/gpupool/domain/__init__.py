"""Frozen types shared by every layer. Imports nothing but the standard library."""
