"""Microsoft's live tests for azure-servicebus against aiosb serve (./dev sdk-tests, #47)."""
