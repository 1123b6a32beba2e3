"""Reports: views of the run record for people (Markdown now; HTML with plots later)."""
