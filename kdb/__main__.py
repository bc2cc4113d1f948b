from kdb.cli import main

if __name__ == "__main__":  # ingest workers are spawned: they import this module without running the CLI
    main()
