"""``python -m gpupool`` runs the gpupool command."""

from gpupool.cli.main import main

main()
