-- Headless Neovim (0.7+) as a second, independent LSP client: start the AccelOpt server, open a
-- kernel, wait for its diagnostics, ask for a hover and the code lenses, print one JSON line, quit.
-- Inputs come from the environment: PROBE_PYTHON, PROBE_ROOT, PROBE_KERNEL, PROBE_LINE (1-based).
local python = os.getenv("PROBE_PYTHON")
local root = os.getenv("PROBE_ROOT")
local kernel = os.getenv("PROBE_KERNEL")
local line = tonumber(os.getenv("PROBE_LINE"))

local client_id = vim.lsp.start_client({
  name = "accelopt",
  cmd = { python, "-m", "server" },
  root_dir = root,
  settings = { accelopt = { hardware = "trn1" } },
})

vim.cmd("edit " .. vim.fn.fnameescape(kernel))
local bufnr = vim.api.nvim_get_current_buf()
vim.lsp.buf_attach_client(bufnr, client_id)

local function ours()
  local found = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    if d.source == "accelopt" then
      table.insert(found, { line = d.lnum + 1, severity = d.severity, message = d.message })
    end
  end
  return found
end

local got = vim.wait(90000, function() return #ours() > 0 end, 100)
local uri = vim.uri_from_bufnr(bufnr)
local position = { line = line - 1, character = 5 }
local hover = vim.lsp.buf_request_sync(bufnr, "textDocument/hover",
  { textDocument = { uri = uri }, position = position }, 20000) or {}
local lenses = vim.lsp.buf_request_sync(bufnr, "textDocument/codeLens", { textDocument = { uri = uri } }, 20000) or {}

local hover_text = ""
for _, response in pairs(hover) do
  if response.result and response.result.contents then
    hover_text = response.result.contents.value or ""
  end
end
local titles = {}
for _, response in pairs(lenses) do
  for _, lens in ipairs(response.result or {}) do
    if lens.command then table.insert(titles, lens.command.title) end
  end
end

io.stdout:write(vim.fn.json_encode({ waited = got, diagnostics = ours(), hover = hover_text, lenses = titles }) .. "\n")
vim.lsp.stop_client(client_id)
vim.wait(3000, function() return vim.lsp.get_client_by_id(client_id) == nil end, 50)
vim.cmd("qa!")
