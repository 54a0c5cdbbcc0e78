from sims.cli import main

raise SystemExit(main())
