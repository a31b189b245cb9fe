"""The read wing: reading traces back (reader, runs, selections) and what is built on them: analysis,
diff, the GPU view, the timeline, the report and its server. It never imports the write wing (the
layer check, scripts/check_python_layers.py, holds it apart)."""
