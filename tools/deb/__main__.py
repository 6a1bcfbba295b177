from tools.deb.cli import main

main()
