"""Measured time beside the artifacts: profile files of a run (torch.profiler traces, Triton Proton profiles)
read by pure parsers (`formats`), their launches linked to the kernel folders of a snapshot (`link`), and the
import that stores and records them (`importer`)."""
