"""aiosb benchmarks: each compares two things measured in the same run (quality.md)."""
