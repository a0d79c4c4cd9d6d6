"""Reports of one run: plots (figures.py), the numbers behind them (data.py), and the HTML
page and Markdown summary that hold them (page.py)."""

from fwbench.collector.analysis.report.page import ReportFiles, write_report

__all__ = ["ReportFiles", "write_report"]
