#!/usr/bin/env node
// The `mikro-orm-saga` operator CLI (package.json `bin`). `mikro-orm-saga --help` lists the commands.
import module from 'node:module';

// Most of a command's time is Node compiling the modules it loads (MikroORM's, the driver's, the CLI's). Node 22.1
// and later keep that compiled code in a disk cache (NODE_COMPILE_CACHE, else the OS temp folder; off with
// NODE_DISABLE_COMPILE_CACHE=1), so it is enabled before they load: the CLI itself is imported afterwards.
(module as { enableCompileCache?: () => unknown }).enableCompileCache?.();
const { processIo, runCli } = await import('./run-cli.js');

process.exitCode = await runCli(process.argv.slice(2), processIo());
