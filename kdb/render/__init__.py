"""Pure renderers of catalog listings (tags, show, ingest, verify, gc) and the text primitives every report
shares (aligned tables drawn with rich in kdb.render.tables, CSV, markdown, JSON). No printing here.

May import: nothing of kdb.
"""
