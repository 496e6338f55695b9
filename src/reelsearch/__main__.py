from reelsearch.cli.main import main

main()
