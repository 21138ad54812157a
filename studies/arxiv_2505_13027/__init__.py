"""The pre-registered reproduction of arXiv 2505.13027 ("Unpacking Positional
Encoding in Transformers", ICLR 2026 as "Deconstructing Positional Information"):
its plan, decision rules, report and committed results. The library
(``pe_spectral``) never imports from here.

Paths are relative to the repository root, where the study's programs run.
"""
import os

ROOT = os.path.join("studies", "arxiv_2505_13027")
RESULTS = os.path.join(ROOT, "results")
