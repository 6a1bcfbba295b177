from scxctl.cli import main

main()
