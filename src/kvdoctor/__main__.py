from kvdoctor.cli.boot import main

main()
