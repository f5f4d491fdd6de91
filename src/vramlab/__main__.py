from vramlab.cli import main

raise SystemExit(main())
