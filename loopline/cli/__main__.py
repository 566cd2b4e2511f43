from loopline.cli import main

raise SystemExit(main())
