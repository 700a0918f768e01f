"""Where the notebooks live online: defined once, stamped into every notebook."""
REPO = "tudui-lab/pytorch-cpu-gpu"  # GitHub owner/name
BRANCH = "main"
