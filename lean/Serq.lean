import Serq.IR
import Serq.Oracle
