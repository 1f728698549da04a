"""Text rendering of results and tables."""

from capsim.report.console import result_block
from capsim.results.text_tables import csv_table, markdown_table
from capsim.api import simulate
from helpers import workload


def test_result_block_uses_vllm_line_names(round_gpu_file):
    block = result_block(simulate(workload(round_gpu_file)).summary).splitlines()
    assert block[0] == "============ Serving Benchmark Result ============" and len(block[0]) == 50
    assert block[1].startswith("Successful requests:") and block[1].split()[-1] == "40"
    for header in ("---------------Time to First Token----------------",
                   "-----Time per Output Token (excl. 1st token)------",
                   "---------------Inter-token Latency----------------"):
        assert header in block
    assert block[-1] == "=" * 50


def test_markdown_and_csv():
    assert markdown_table(["a", "b"], [[1000, "x"]]) == "| a | b |\n| --- | --- |\n| 1,000 | x |"
    assert csv_table(["a", "b"], [[1, "x,y"]]) == 'a,b\n1,"x,y"\n'
