from tools.vm.cli import main

main()
