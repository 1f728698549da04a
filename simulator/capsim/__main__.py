from capsim.cli.app import console_main

console_main()
