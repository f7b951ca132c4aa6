from kvdoctor.entry import main

main()
