from weakspots.cli import main

raise SystemExit(main())
