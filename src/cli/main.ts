#!/usr/bin/env node
// The `mikro-orm-saga` operator CLI (package.json `bin`). `mikro-orm-saga --help` lists the commands.
import { processIo, runCli } from './run-cli.js';

process.exitCode = await runCli(process.argv.slice(2), processIo());
