from weakspots.sims.cli import main

raise SystemExit(main())
