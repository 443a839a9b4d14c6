"""Reports: tables, plots (matplotlib SVG), findings, and self-contained HTML (Jinja2, autoescape) and Markdown."""
