"""Presentation: the HTML and Markdown report (report; what it shows read once by contents), the command
line's tables, CSV and JSON (listing, comparison), and a plan's live progress (progress)."""
