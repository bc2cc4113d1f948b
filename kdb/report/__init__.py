"""`kdb report`: one self-contained static HTML page (plots, a sortable and filterable table, a drill-down per
kernel) of a diff or of one snapshot. Downstream of diff and render; the plotting library (Plotly, whose
JavaScript is inlined) is confined to kdb/report/html.py. Pure: records in, one HTML string out."""
