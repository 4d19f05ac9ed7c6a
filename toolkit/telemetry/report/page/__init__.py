"""report.html: the offline page (``html``) and the data its canvas draws (``canvas_data``)."""
