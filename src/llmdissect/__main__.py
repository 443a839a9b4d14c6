from llmdissect.cli.main import run

run()
