"""Showing a run to a person: the HTML report (report, report_page, report_charts, on summary) and the Rerun view."""
