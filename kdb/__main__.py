from kdb.cli import main

main()
