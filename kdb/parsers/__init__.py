"""Parsers: pure functions from bytes or text to records. They raise only kdb.errors.ParseError."""
