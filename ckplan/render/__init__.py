"""Output formats: rich tables for people, JSON for tools, Markdown/HTML for reports."""
