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


def test_result_block_shows_the_pools_of_a_disaggregated_run(round_gpu_file):
    link = {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-3}
    w = workload(round_gpu_file, serving={"disaggregated": {"prefill": {"replicas": 2}, "link": link}})
    text = result_block(simulate(w).summary)
    assert "Prefill pool:                            2 x TP 1 round-gpu (2 GPU(s))" in text
    assert "Decode pool:                             1 x TP 1 round-gpu (1 GPU(s))" in text
    assert "KV transfers, GB moved:                  40," in text
