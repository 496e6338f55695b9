from reelsearch.cli.entry import main

main()
