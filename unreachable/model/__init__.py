"""What a scan found (report.py) and how its fields travel (wire.py): every
stage's output, below the stages that read and change it (triage) and the
reporters that write it (report/)."""
