// The terminal bundle of moat's console: xterm.js and its fit addon, as one ES module
// (esbuild writes it to ../dist/term.js at make build).
export { Terminal } from '@xterm/xterm';
export { FitAddon } from '@xterm/addon-fit';
