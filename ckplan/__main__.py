from ckplan.cli.app import main

main()
