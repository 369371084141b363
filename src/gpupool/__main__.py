"""``python -m gpupool`` runs the gpupool command."""

from gpupool.cli.start import main

main()
