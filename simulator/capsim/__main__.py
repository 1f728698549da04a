from capsim.cli import console_main

console_main()
